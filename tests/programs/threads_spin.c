/* A thread spins, without a system call, until another sets a flag: under the qemu backend
   the spinning thread must be interrupted for the other to run (threads take turns). The
   setter waits (in system calls) until main spins, so that main is always interrupted in
   its loop, whichever thread the scheduler ran first. */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static volatile int flag, spinning;

static void *setter(void *arg) {
    while (!spinning)
        usleep(100);
    long sum = 0;
    for (long i = 1; i <= (long)arg; i++)
        sum += i;
    flag = 1;
    return (void *)sum;
}

int main(void) {
    pthread_t t;
    void *sum;
    pthread_create(&t, NULL, setter, (void *)1000);
    spinning = 1;
    while (!flag)
        ;
    pthread_join(t, &sum);
    printf("flag set, sum %ld\n", (long)sum);
    return 0;
}
