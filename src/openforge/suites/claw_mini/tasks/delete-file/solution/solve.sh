#!/bin/sh
set -e
rm -f junk.tmp
