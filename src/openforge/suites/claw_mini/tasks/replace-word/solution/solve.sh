#!/bin/sh
set -e
sed -i 's/world/forge/g' greeting.txt
