/* Creates a thread: the step backend stops with a clear message (threads are not supported). */
#include <pthread.h>
#include <stdio.h>

static void *work(void *arg) { return arg; }

int main(void) {
    pthread_t t;
    pthread_create(&t, NULL, work, NULL);
    pthread_join(t, NULL);
    puts("joined");
    return 0;
}
