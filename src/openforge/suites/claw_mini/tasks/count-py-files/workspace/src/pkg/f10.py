# file 10
