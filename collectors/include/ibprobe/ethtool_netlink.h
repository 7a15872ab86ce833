// The kernel's ethtool generic netlink family, for what lies below a port's counters: the pages
// of its transceiver module (ETHTOOL_MSG_MODULE_EEPROM_GET, what `ethtool -m` reads) and its FEC
// statistics (ETHTOOL_MSG_FEC_GET with ETHTOOL_FLAG_STATS, what `ethtool -I --show-fec` reads).
// Linux 5.13 or later, CONFIG_ETHTOOL_NETLINK. Decoding is module_eeprom.h's and
// fec_statistics.h's.
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "ibprobe/module_eeprom.h"
#include "ibprobe/unique_fd.h"

namespace ibprobe::collectors {

// One NETLINK_GENERIC socket with the ethtool family resolved. The kernel handles a request in
// the sender's context, so its answer is queued by the time the send returns: no read waits.
// Failures are errnos (system category): the kernel's answer to the request (EOPNOTSUPP from a
// driver without module access, ENODEV for an unknown netdev, EIO from a module that did not
// answer) or, for an answer that is not a well-formed reply, EBADMSG.
class EthtoolNetlink {
 public:
  // ENOENT when the kernel has no ethtool family.
  static std::expected<EthtoolNetlink, std::error_code> open();

  // The bytes of one page (128 at page.offset) of `netdev`'s module.
  std::expected<std::vector<std::uint8_t>, std::error_code> module_page(const std::string& netdev,
                                                                        const ModulePage& page);

  // The attributes of `netdev`'s ETHTOOL_MSG_FEC_GET_REPLY, statistics included, for
  // decode_fec_reply.
  std::expected<std::vector<std::uint8_t>, std::error_code> fec_reply(const std::string& netdev);

 private:
  EthtoolNetlink(UniqueFd socket, std::uint16_t family)
      : socket_(std::move(socket)), family_(family) {}

  // Sends one request of `command` with `attributes` to `family`; the answer's attributes, after
  // its genetlink header.
  std::expected<std::vector<std::uint8_t>, std::error_code> request(
      std::uint16_t family, std::uint8_t command, std::uint8_t version,
      const std::vector<std::uint8_t>& attributes);

  UniqueFd socket_;
  std::uint16_t family_;
  std::uint32_t sequence_ = 0;
};

// The pages module_pages_to_read names for `netdev`'s module, read until it names no new one. A
// page the kernel refuses is left out (decode_module then says which is missing), except the
// lower page: without it there is no module to decode, and its errno is the answer.
std::expected<ModulePages, std::error_code> read_module_pages(EthtoolNetlink& ethtool,
                                                              const std::string& netdev);

}  // namespace ibprobe::collectors
