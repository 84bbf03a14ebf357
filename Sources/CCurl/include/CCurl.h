// CCurl: typed, non-variadic wrappers over libcurl's variadic calls.
//
// curl_easy_setopt, curl_multi_setopt and curl_easy_getinfo are C variadic
// functions, which Swift cannot call. Each wrapper below fixes one argument
// type, so Swift sees an ordinary typed function. Nothing else lives here.
#ifndef CCURL_H
#define CCURL_H

#include <curl/curl.h>

typedef size_t (*ccurl_data_callback)(char *data, size_t size, size_t count, void *userdata);
typedef int (*ccurl_xferinfo_callback)(void *userdata, curl_off_t dltotal, curl_off_t dlnow,
                                       curl_off_t ultotal, curl_off_t ulnow);

/// curl_easy_setopt with a long argument.
CURLcode ccurl_easy_setopt_long(CURL *handle, CURLoption option, long value);
/// curl_easy_setopt with a curl_off_t argument.
CURLcode ccurl_easy_setopt_off(CURL *handle, CURLoption option, curl_off_t value);
/// curl_easy_setopt with a string argument (libcurl copies it).
CURLcode ccurl_easy_setopt_string(CURL *handle, CURLoption option, const char *value);
/// curl_easy_setopt with a pointer argument (WRITEDATA, HEADERDATA, PRIVATE).
CURLcode ccurl_easy_setopt_pointer(CURL *handle, CURLoption option, void *value);
/// curl_easy_setopt with a data callback (WRITEFUNCTION, HEADERFUNCTION).
CURLcode ccurl_easy_setopt_callback(CURL *handle, CURLoption option, ccurl_data_callback value);
/// curl_easy_setopt with a progress callback (XFERINFOFUNCTION).
CURLcode ccurl_easy_setopt_xferinfo(CURL *handle, CURLoption option, ccurl_xferinfo_callback value);
/// curl_multi_setopt with a long argument.
CURLMcode ccurl_multi_setopt_long(CURLM *handle, CURLMoption option, long value);
/// curl_easy_getinfo for a long result.
CURLcode ccurl_easy_getinfo_long(CURL *handle, CURLINFO info, long *value);
/// curl_easy_getinfo for a curl_off_t result.
CURLcode ccurl_easy_getinfo_off(CURL *handle, CURLINFO info, curl_off_t *value);
/// curl_easy_getinfo for a pointer result (CURLINFO_PRIVATE).
CURLcode ccurl_easy_getinfo_pointer(CURL *handle, CURLINFO info, void **value);

#endif
