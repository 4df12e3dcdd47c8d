#!/bin/sh
set -e
mv draft.txt final.txt
