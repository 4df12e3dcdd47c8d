#!/bin/sh
set -e
wc -l < data.txt | tr -d " " > count.txt
