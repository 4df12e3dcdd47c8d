# file 4
