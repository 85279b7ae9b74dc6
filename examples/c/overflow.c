/* The README's walkthrough: a name copied without a bound runs into the pointer stored
 * after it, and the program crashes later, far from the copy, when it uses the pointer. */
#include <stdio.h>
#include <string.h>

struct account {
    char name[8];
    long *balance;
};

static void rename_account(struct account *a, const char *name) {
    strcpy(a->name, name);
}

static void deposit(struct account *a, long amount) {
    *a->balance += amount;
}

int main(int argc, char **argv) {
    long balance = 100;
    struct account a = {"alice", &balance};
    deposit(&a, 20);
    rename_account(&a, argc > 1 ? argv[1] : "alice-and-bob");
    deposit(&a, 30);
    printf("%s has %ld\n", a.name, balance);
    return 0;
}
