/* execve while another thread lives. By default main runs it while a thread waits on a
   pipe nobody writes; with the argument `thread`, the thread runs it while main waits for it
   in pthread_join. Either way the kernel ends the other thread and the process, its pid
   unchanged, becomes `/bin/echo after exec`. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int fds[2];
static volatile int started;

static void run_echo(const char *who) {
    printf("%s execs\n", who);
    fflush(stdout);
    execl("/bin/echo", "echo", "after", "exec", (char *)NULL);
}

static void *wait_forever(void *arg) {
    char c;
    started = 1;
    return (void *)(long)read(fds[0], &c, 1);
}

static void *exec_here(void *arg) {
    run_echo("the thread");
    return NULL;
}

int main(int argc, char **argv) {
    pthread_t t;
    if (argc > 1 && strcmp(argv[1], "thread") == 0) {
        pthread_create(&t, NULL, exec_here, NULL);
        pthread_join(t, NULL);
        return 1;
    }
    pipe(fds);
    pthread_create(&t, NULL, wait_forever, NULL);
    while (!started)
        usleep(1000);
    run_echo("main");
    return 1;
}
