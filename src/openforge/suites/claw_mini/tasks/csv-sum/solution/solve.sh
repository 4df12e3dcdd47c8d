#!/bin/sh
set -e
python3 -c 'import csv; print(sum(int(r["amount"]) for r in csv.DictReader(open("sales.csv"))))' > total.txt
