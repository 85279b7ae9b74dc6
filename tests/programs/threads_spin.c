/* A thread spins, without a system call, until another sets a flag: under the qemu backend
   the spinning thread must be interrupted for the other to run (threads take turns). */
#include <pthread.h>
#include <stdio.h>

static volatile int flag;

static void *setter(void *arg) {
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
    while (!flag)
        ;
    pthread_join(t, &sum);
    printf("flag set, sum %ld\n", (long)sum);
    return 0;
}
