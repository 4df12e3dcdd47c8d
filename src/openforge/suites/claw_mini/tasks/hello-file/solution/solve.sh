#!/bin/sh
set -e
printf "hello\n" > hello.txt
