#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"
int main() { return fa_supports_head_size(128) ? 0 : 1; }
