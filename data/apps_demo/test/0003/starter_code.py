def is_leap(year):
	