#!/bin/sh
set -e
mkdir -p out && echo ok > out/done.txt
