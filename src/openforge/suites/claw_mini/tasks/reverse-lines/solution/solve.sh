#!/bin/sh
set -e
tac names.txt > reversed.txt
