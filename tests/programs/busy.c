/* Busy in user code until killed, through a conditional branch on every turn: the trace
 * keeps describing the loop (TNT bits), so a recording stopped anywhere in it decodes to
 * the recorder's count. (A loop with no such branch, as spin.c, leaves the trace nothing to
 * count its turns by.) */
int main(void) {
    volatile unsigned long n = 0;
    for (unsigned long i = 0;; i++)
        if (i % 3 == 0)
            n++;
}
