/* Calls execve twice: first a program that does not exist (the call fails and the program
   goes on, recorded), then `sh -c 'echo ran; exit 5'`, which rtit follows: the recording of
   sh goes on in its own directory, and the run's output and status are sh's. */
#include <unistd.h>

int main(void) {
    char *argv[] = {"/bin/sh", "-c", "echo ran; exit 5", 0};
    execv("/no/such/program", argv);
    execv("/bin/sh", argv);
    return 3;
}
