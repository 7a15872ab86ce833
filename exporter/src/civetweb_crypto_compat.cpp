// A stand-in for libcrypto.so, for civetweb 1.15 as Debian 12 ships it. civetweb loads
// libcrypto at run time with dlopen("libcrypto.so"), a name only libssl-dev provides. This
// library has no code of its own: it carries the soname libcrypto.so and depends on the runtime
// library libcrypto.so.3, so once HttpServer has loaded it, civetweb's dlopen finds it by that
// soname and every lookup through it lands in the real libcrypto.
