#!/bin/sh
set -e
python3 -c 'import csv,json,sys; w=csv.writer(open("items.csv","w",newline="")); w.writerow(["name","price"]); [w.writerow([i["name"], i["price"]]) for i in json.load(open("items.json"))]'
