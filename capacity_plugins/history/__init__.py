"""The run catalog and the regression gate (docs/history.md).

catalog.py opens a catalog (SQLite file or PostgreSQL URL) and migrates it (schema.py); record.py
turns an analysed run or repeat set into its entry; gate.py judges a candidate against a baseline
with `capacity compare`'s noise model. The commands are cli/history.py and cli/gate.py; the trend
plot is outputs/history_trend.py.
"""
