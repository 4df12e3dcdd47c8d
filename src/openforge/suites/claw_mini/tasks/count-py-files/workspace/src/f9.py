# file 9
