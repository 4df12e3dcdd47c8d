#!/bin/sh
set -e
sort -n numbers.txt | tail -n 1 > max.txt
