#!/bin/sh
set -e
echo end >> log.txt
