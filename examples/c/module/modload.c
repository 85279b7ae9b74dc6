/* A stand-in for the kernel's module loader, so that "driver code" can be recorded on any
 * machine: loads a relocatable x86-64 object (.o) at a fixed address, section by section,
 * applies its relocations, lists the section addresses the way /sys/module/NAME/sections/
 * does, and calls its drv_main().
 *
 *   modload OBJECT SYSROOT [ROUNDS]   writes SYSROOT/NAME/sections/<section> ("0x...")
 *                                     and SYSROOT/kallsyms (the symbols it exports)
 *
 * The object may call the functions of `exports` below, as a module calls the kernel's.
 * Build: gcc -O1 -g -static -o modload modload.c; gcc -c -O1 -g -fno-pic drvmod.c */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#define MOD_BASE 0x20000000UL /* below 2 GiB: R_X86_64_32S reaches it */
#define MOD_SIZE (1UL << 20)

static void die(const char *what) { fprintf(stderr, "modload: %s\n", what); exit(2); }

/* What the "kernel" exports to the object. */
__attribute__((noinline)) void drv_log(int round) { fprintf(stderr, "drvmod: round %d failed\n", round); }

static const struct { const char *name; void *addr; } exports[] = { { "drv_log", (void *)drv_log } };
#define NEXPORTS (sizeof exports / sizeof exports[0])

static uint64_t exported(const char *name)
{
    for (size_t i = 0; i < NEXPORTS; i++)
        if (!strcmp(exports[i].name, name)) return (uint64_t)exports[i].addr;
    return 0;
}

static unsigned char *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f) die("cannot open the object");
    fseek(f, 0, SEEK_END);
    *size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc(*size);
    if (!buf || fread(buf, 1, *size, f) != *size) die("cannot read the object");
    fclose(f);
    return buf;
}

static void mkdirs(const char *path)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') { *p = 0; mkdir(tmp, 0755); *p = '/'; }
    mkdir(tmp, 0755);
}

int main(int argc, char **argv)
{
    if (argc < 3) die("usage: modload OBJECT SYSROOT [ROUNDS]");
    size_t size;
    unsigned char *obj = read_file(argv[1], &size);
    Elf64_Ehdr *eh = (Elf64_Ehdr *)obj;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_type != ET_REL || eh->e_machine != EM_X86_64)
        die("not an x86-64 relocatable object");
    Elf64_Shdr *sh = (Elf64_Shdr *)(obj + eh->e_shoff);
    const char *names = (const char *)obj + sh[eh->e_shstrndx].sh_offset;
    unsigned char *base = mmap((void *)MOD_BASE, MOD_SIZE, PROT_READ | PROT_WRITE | PROT_EXEC,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (base != (unsigned char *)MOD_BASE) die("cannot map the module area");

    /* Sections: allocated ones placed one after another, executable ones first (as the
     * kernel groups them), each at its alignment. */
    uint64_t *addr = calloc(eh->e_shnum, sizeof *addr);
    uint64_t cursor = MOD_BASE;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < eh->e_shnum; i++) {
            if (!(sh[i].sh_flags & SHF_ALLOC) || sh[i].sh_size == 0) continue;
            if (!!(sh[i].sh_flags & SHF_EXECINSTR) != (pass == 0)) continue;
            uint64_t align = sh[i].sh_addralign > 16 ? sh[i].sh_addralign : 16;
            cursor = (cursor + align - 1) & ~(align - 1);
            if (cursor + sh[i].sh_size > MOD_BASE + MOD_SIZE) die("the object is too big");
            addr[i] = cursor;
            if (sh[i].sh_type != SHT_NOBITS)
                memcpy((void *)cursor, obj + sh[i].sh_offset, sh[i].sh_size);
            cursor += sh[i].sh_size;
        }

    Elf64_Sym *syms = NULL;
    const char *strtab = NULL;
    size_t nsyms = 0;
    for (int i = 0; i < eh->e_shnum; i++)
        if (sh[i].sh_type == SHT_SYMTAB) {
            syms = (Elf64_Sym *)(obj + sh[i].sh_offset);
            nsyms = sh[i].sh_size / sizeof *syms;
            strtab = (const char *)obj + sh[sh[i].sh_link].sh_offset;
        }
    if (!syms) die("no symbol table");

    /* Relocations of the placed sections. */
    for (int i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type != SHT_RELA || !addr[sh[i].sh_info]) continue;
        Elf64_Rela *r = (Elf64_Rela *)(obj + sh[i].sh_offset);
        for (size_t k = 0; k < sh[i].sh_size / sizeof *r; k++) {
            Elf64_Sym *s = &syms[ELF64_R_SYM(r[k].r_info)];
            uint64_t S;
            if (s->st_shndx == SHN_ABS) S = s->st_value;
            else if (s->st_shndx != SHN_UNDEF && addr[s->st_shndx]) S = addr[s->st_shndx] + s->st_value;
            else if (s->st_shndx == SHN_UNDEF && exported(strtab + s->st_name)) S = exported(strtab + s->st_name);
            else { fprintf(stderr, "modload: unresolved symbol %s\n", strtab + s->st_name); return 2; }
            uint64_t P = addr[sh[i].sh_info] + r[k].r_offset;
            int64_t v = (int64_t)(S + r[k].r_addend);
            switch (ELF64_R_TYPE(r[k].r_info)) {
            case R_X86_64_64: *(uint64_t *)P = (uint64_t)v; break;
            case R_X86_64_PC64: *(uint64_t *)P = (uint64_t)(v - (int64_t)P); break;
            case R_X86_64_PC32:
            case R_X86_64_PLT32: *(int32_t *)P = (int32_t)(v - (int64_t)P); break;
            case R_X86_64_32: *(uint32_t *)P = (uint32_t)v; break;
            case R_X86_64_32S: *(int32_t *)P = (int32_t)v; break;
            default: fprintf(stderr, "modload: relocation type %lu\n", (unsigned long)ELF64_R_TYPE(r[k].r_info)); return 2;
            }
        }
    }

    /* SYSROOT/NAME/sections/<section>, as the kernel lists a module's sections. */
    const char *file = strrchr(argv[1], '/') ? strrchr(argv[1], '/') + 1 : argv[1];
    char name[256], dir[4096];
    snprintf(name, sizeof name, "%s", file);
    if (strchr(name, '.')) *strchr(name, '.') = 0;
    snprintf(dir, sizeof dir, "%s/%s/sections", argv[2], name);
    mkdirs(dir);
    for (int i = 0; i < eh->e_shnum; i++) {
        if (!addr[i]) continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, names + sh[i].sh_name);
        FILE *f = fopen(path, "w");
        if (!f) die("cannot write the section list");
        fprintf(f, "0x%016lx\n", (unsigned long)addr[i]);
        fclose(f);
    }

    /* SYSROOT/kallsyms, as /proc/kallsyms lists the kernel's symbols. */
    char ks[4096];
    snprintf(ks, sizeof ks, "%s/kallsyms", argv[2]);
    FILE *k = fopen(ks, "w");
    if (!k) die("cannot write the symbol list");
    for (size_t i = 0; i < NEXPORTS; i++)
        fprintf(k, "%016lx T %s\n", (unsigned long)exports[i].addr, exports[i].name);
    fclose(k);

    int (*drv_main)(int) = NULL;
    for (size_t k = 0; k < nsyms; k++)
        if (!strcmp(strtab + syms[k].st_name, "drv_main") && addr[syms[k].st_shndx])
            drv_main = (int (*)(int))(addr[syms[k].st_shndx] + syms[k].st_value);
    if (!drv_main) die("no drv_main in the object");
    int rounds = argc > 3 ? atoi(argv[3]) : 5;
    printf("drv_main(%d) = %d\n", rounds, drv_main(rounds));
    return 0;
}
