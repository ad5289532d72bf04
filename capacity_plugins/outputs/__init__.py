"""Outputs: an analysed run rendered for people — summary.md, report.html and its PNGs, steps.csv, the
console's words. Rendering reads what analysis/ computed; analysis/ never imports it."""
