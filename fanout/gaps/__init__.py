"""The gap report (a face): `fanout gaps` reads a batch's answers file (read.py), finds the questions the notes
do not answer and groups them (analysis.py), compares with a previous report (previous.py) and writes
report.md / report.html (report.py).

May import fanout.api and below, and fanout.exec.progress.
"""
