# file 8
