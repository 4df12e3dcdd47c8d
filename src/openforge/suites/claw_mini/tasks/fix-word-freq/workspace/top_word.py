import sys
from collections import Counter

words = open(sys.argv[1]).read().split()
print(Counter(words).most_common(1)[0][0])
