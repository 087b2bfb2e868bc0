// Linux system calls the Glibc module does not export (epoll, eventfd, timerfd, malloc_trim), and typed
// wrappers for the few macros Swift cannot call. Only declarations and static inline functions:
// a system-library target cannot hold .c files.
#ifndef ROUSE_CLINUXSHIMS_H
#define ROUSE_CLINUXSHIMS_H
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <fcntl.h>
#include <unistd.h>
#include <errno.h>
#include <signal.h>
#include <malloc.h>
#endif
