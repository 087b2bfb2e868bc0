// libmicrohttpd, the HTTP server under Rouse's HTTP API. Swift cannot call C variadic functions
// (MHD_start_daemon, MHD_get_daemon_info, MHD_get_connection_info), so the few calls Rouse makes
// with them are typed static inline wrappers here, prefixed rouse_mhd_.
#ifndef ROUSE_CMICROHTTPD_H
#define ROUSE_CMICROHTTPD_H
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <microhttpd.h>

/// Starts a daemon with its own polling threads (a pool of `thread_pool_size`, each serving many
/// connections, event driven), bound to `address` (port 0: the kernel picks one), with a limit
/// on connections, an idle timeout in seconds, a memory limit per connection, and suspend/resume
/// allowed so a handler can answer later from another thread.
static inline struct MHD_Daemon *rouse_mhd_start(
    unsigned int flags, const struct sockaddr *address, MHD_AccessHandlerCallback handler, void *handler_context,
    MHD_RequestCompletedCallback completed, void *completed_context, unsigned int thread_pool_size,
    unsigned int connection_limit, unsigned int connection_timeout, size_t connection_memory_limit)
{
    return MHD_start_daemon(
        flags | MHD_USE_INTERNAL_POLLING_THREAD | MHD_ALLOW_SUSPEND_RESUME, 0, NULL, NULL, handler, handler_context,
        MHD_OPTION_SOCK_ADDR, address,
        MHD_OPTION_THREAD_POOL_SIZE, thread_pool_size,
        MHD_OPTION_CONNECTION_LIMIT, connection_limit,
        MHD_OPTION_CONNECTION_TIMEOUT, connection_timeout,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, connection_memory_limit,
        MHD_OPTION_NOTIFY_COMPLETED, completed, completed_context,
        MHD_OPTION_END);
}

/// The port the daemon's listening socket is bound to, or 0.
static inline uint16_t rouse_mhd_bound_port(struct MHD_Daemon *daemon)
{
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info == NULL ? 0 : info->port;
}

/// The client's socket address of a connection, or NULL.
static inline const struct sockaddr *rouse_mhd_client_address(struct MHD_Connection *connection)
{
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    return info == NULL ? NULL : info->client_addr;
}
#endif
