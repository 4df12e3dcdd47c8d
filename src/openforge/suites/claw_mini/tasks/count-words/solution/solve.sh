#!/bin/sh
set -e
wc -w < data.txt | tr -d " " > words.txt
