/* A crash on the last instruction of a block: a call through a function table that is not
   there (the pointer is read from address 8). The call both reads memory and ends its
   block, so whether it retired is known only from the signal that ended the process. */
#include <stdio.h>

struct ops {
    void *unused;
    void (*run)(void);
};

static struct ops *volatile table;

int main(void) {
    puts("about to call through nothing");
    fflush(stdout);
    table->run();
    return 0;
}
