/* Both threads block for long: the worker sleeps 30 s, the main thread waits for it in
   pthread_join. A SIGINT to `rtit record` meanwhile ends the recording at once. */
#include <pthread.h>
#include <unistd.h>

static void *sleeper(void *arg) {
    (void)arg;
    sleep(30);
    return NULL;
}

int main(void) {
    pthread_t t;
    pthread_create(&t, NULL, sleeper, NULL);
    pthread_join(t, NULL);
    return 0;
}
