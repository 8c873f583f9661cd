/* FLASHATTN_STATIC: the implementation private to this file. Compiled by check_static.py with
   -Wall -Wextra -Werror: a file that calls one function must draw no unused-function warning. */
#define FLASHATTN_STATIC
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"
int main(void) { return fa_supports_head_size(128) ? 0 : 1; }
