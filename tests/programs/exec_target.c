/* What a wrapper runs (tests/exec.rs): prints its arguments and an environment variable, and
   exits with a status made from them, so the recorded run's output and status can be told
   from a wrapper's. */
#include <stdio.h>
#include <stdlib.h>

int twice(int x) { return 2 * x; }

int main(int argc, char **argv) {
    const char *said = getenv("SAID");
    int v = twice(argc + 20);
    printf("target %d %s %s\n", v, argc > 1 ? argv[1] : "-", said ? said : "-");
    return v & 7;
}
