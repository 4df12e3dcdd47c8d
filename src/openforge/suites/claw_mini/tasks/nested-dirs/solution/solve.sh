#!/bin/sh
set -e
mkdir -p a/b/c && echo leaf > a/b/c/leaf.txt
