#!/bin/sh
set -e
tr ' ' '\n' < data.txt | grep -cx maple > maple.txt
