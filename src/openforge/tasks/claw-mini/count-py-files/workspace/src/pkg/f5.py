# file 5
