/* core/timer: monotonic time for measurements. Not for: wall-clock dates. */
#ifndef IL_CORE_TIMER_H
#define IL_CORE_TIMER_H

#include <time.h>

/* Seconds from CLOCK_MONOTONIC. Can't fail. */
static inline double il_time_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
