// The machine's 1-minute load average (/proc/loadavg; 0 when unreadable),
// for benchmarks to say when other processes competed with them.
#pragma once

#include <cstdio>

namespace tocl::bench {

inline double LoadAverage() {
  double load = 0;
  if (std::FILE* file = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(file, "%lf", &load) != 1) load = 0;
    std::fclose(file);
  }
  return load;
}

}  // namespace tocl::bench
