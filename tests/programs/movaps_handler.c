/* A signal handler that stores an SSE register to a 16-byte-aligned local with `movaps`.
   The x86-64 ABI has the stack 16-byte aligned at a call, so the compiler places the local
   there without realigning; QEMU before 9.1 built the handler's frame 8 bytes off (QEMU
   gitlab #1648), and the store faulted. Exits 0 after three handled signals. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

static volatile int handled;

static void handler(int sig) {
    _Alignas(16) unsigned char slot[16];
    __asm__ volatile("pcmpeqd %%xmm0, %%xmm0\n\tmovaps %%xmm0, %0" : "=m"(slot) : : "xmm0");
    handled += sig == SIGUSR1 && slot[0] == 0xff;
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigaction(SIGUSR1, &sa, NULL);
    for (int i = 0; i < 3; i++)
        raise(SIGUSR1);
    printf("handled %d\n", handled);
    return handled == 3 ? 0 : 1;
}
