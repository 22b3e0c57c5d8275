class Solution:
    def maxProfit(self, prices: List[int]) -> int:
        