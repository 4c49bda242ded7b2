#include "agent/malloc_arenas.h"

#include <cstdio>
#include <cstdlib>
#include <string_view>

#include <malloc.h>

namespace ithbat::agent {

void LimitMallocArenas() { mallopt(M_ARENA_MAX, 1); }

size_t MallocArenaCount() {
  char* buf = nullptr;
  size_t size = 0;
  FILE* f = open_memstream(&buf, &size);
  if (f == nullptr) return 0;
  const int rc = malloc_info(0, f);
  std::fclose(f);
  size_t heaps = 0;
  if (rc == 0) {
    // One <heap nr="N"> element per arena, then the totals.
    const std::string_view xml(buf, size);
    for (size_t at = xml.find("<heap nr="); at != std::string_view::npos; at = xml.find("<heap nr=", at + 1))
      ++heaps;
  }
  std::free(buf);
  return heaps;
}

}  // namespace ithbat::agent
