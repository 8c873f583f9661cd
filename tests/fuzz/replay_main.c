/* replay_main.c - a plain main() for the fuzz targets, for builds without libFuzzer (gcc):
   runs LLVMFuzzerTestOneInput on every file named on the command line, and on every file of
   every directory named (one level, e.g. tests/fuzz/corpus/<target>), plus the empty input.
   Prints "replay: N inputs" and exits 0; an invariant violation traps (non-zero exit). */
#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static long replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf;
    long n;
    if (f == NULL) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = (uint8_t *)malloc(n > 0 ? (size_t)n : 1);
    if (buf == NULL || (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n)) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        exit(2);
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, (size_t)n);
    free(buf);
    return 1;
}

int main(int argc, char **argv)
{
    long count = 0;
    int i;
    LLVMFuzzerTestOneInput((const uint8_t *)"", 0);
    ++count;
    for (i = 1; i < argc; ++i) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: no such path %s\n", argv[i]);
            return 2;
        }
        if (S_ISDIR(st.st_mode)) {
            DIR *d = opendir(argv[i]);
            struct dirent *e;
            if (d == NULL) {
                fprintf(stderr, "replay: cannot open %s\n", argv[i]);
                return 2;
            }
            while ((e = readdir(d)) != NULL) {
                char path[4096];
                struct stat fst;
                if (e->d_name[0] == '.') continue;
                snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
                if (stat(path, &fst) == 0 && S_ISREG(fst.st_mode)) count += replay_file(path);
            }
            closedir(d);
        } else {
            count += replay_file(argv[i]);
        }
    }
    printf("replay: %ld inputs\n", count);
    return 0;
}
