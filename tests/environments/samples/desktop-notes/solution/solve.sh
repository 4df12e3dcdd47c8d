# The reference solution: the file the check reads, as the agent would leave it.
printf 'hello desktop' >/workspace/notes.txt
