// libcurl (HTTP/2 to APNs and FCM). curl_easy_setopt, curl_easy_getinfo and curl_multi_setopt are
// variadic, which Swift cannot call: the typed static inline wrappers below stand in for them.
#ifndef ROUSE_CCURL_H
#define ROUSE_CCURL_H
#include <curl/curl.h>

static inline CURLcode rouse_curl_easy_setopt_long(CURL *handle, CURLoption option, long value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode rouse_curl_easy_setopt_string(CURL *handle, CURLoption option, const char *value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode rouse_curl_easy_setopt_pointer(CURL *handle, CURLoption option, void *value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode rouse_curl_easy_getinfo_long(CURL *handle, CURLINFO info, long *value) {
    return curl_easy_getinfo(handle, info, value);
}
static inline CURLMcode rouse_curl_multi_setopt_long(CURLM *handle, CURLMoption option, long value) {
    return curl_multi_setopt(handle, option, value);
}
/// CURLOPT_WRITEFUNCTION and CURLOPT_HEADERFUNCTION take a function pointer through the variadic setopt.
static inline CURLcode rouse_curl_easy_setopt_write_callback(CURL *handle, CURLoption option, curl_write_callback value) {
    return curl_easy_setopt(handle, option, value);
}
/// CURLOPT_HTTPHEADER takes a header list through the variadic setopt.
static inline CURLcode rouse_curl_easy_setopt_slist(CURL *handle, CURLoption option, struct curl_slist *value) {
    return curl_easy_setopt(handle, option, value);
}
/// CURLVERSION_NOW is a macro.
static inline curl_version_info_data *rouse_curl_version_info(void) {
    return curl_version_info(CURLVERSION_NOW);
}
#endif
