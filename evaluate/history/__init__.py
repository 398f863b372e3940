"""The results store: every result kept, comparable over time, and regressions found across stack versions.

    python3 -m evaluate.history add OUTPUT_DIR [RUN_SET|output.zip|result.json ...] [--tag TAG]
    python3 -m evaluate.history list | show ID | regressions | export --format csv|jsonl

records.py turns a result into what is stored, store.py keeps it (sql.py: SQLite or PostgreSQL), regressions.py
judges the newest runs against the ones before, export.py writes perf.csv and JSON lines, query.py and section.py
give evaluate.compare its stored results and its report's History section.
"""
