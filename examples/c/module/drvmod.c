/* The "driver" of the module stand-in: compiled to a relocatable object (gcc -c), loaded by
 * modload.c the way the kernel loads a module, and traced through an IP filter on its text. */

struct packet {
    unsigned len;
    unsigned char data[32];
};

static struct packet ring[8];
static unsigned head;
unsigned drv_errors;

__attribute__((noinline)) static unsigned checksum(const unsigned char *p, unsigned n)
{
    unsigned sum = 0;
    for (unsigned i = 0; i < n; i++)
        sum = (sum << 1 | sum >> 31) ^ p[i];
    return sum;
}

__attribute__((noinline)) static int submit(unsigned seed)
{
    struct packet *pk = &ring[head++ % 8];
    pk->len = 8 + seed % 24;
    for (unsigned i = 0; i < pk->len; i++)
        pk->data[i] = (unsigned char)(seed * 31 + i);
    unsigned sum = checksum(pk->data, pk->len);
    return (sum & 1) ? 0 : -1;
}

/* Provided by the loader, as the kernel provides printk: an external symbol whose address
 * the loader lists in SYSROOT/kallsyms. */
extern void drv_log(int round);

int drv_main(int rounds)
{
    int ok = 0;
    for (int r = 0; r < rounds; r++) {
        if (submit((unsigned)r) == 0) {
            ok++;
        } else {
            drv_errors++;
            drv_log(r);
        }
    }
    return ok;
}
