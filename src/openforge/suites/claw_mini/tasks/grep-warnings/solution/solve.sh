#!/bin/sh
set -e
grep WARN app.log > warnings.txt
