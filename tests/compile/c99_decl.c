#include "flashattn.h"
int main(void) { return fa_supports_head_size(128) ? 0 : 1; }
