#!/bin/sh
set -e
python3 -c 'import json; it=json.load(open("items.json")); lo=min(i["stock"] for i in it); print("\n".join(i["name"] for i in it if i["stock"]==lo))' > low.txt
