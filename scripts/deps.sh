#!/usr/bin/env bash
# Installs what building, testing and running Rouse need on Debian, once: the C libraries Swift
# links (OpenSSL, libpq, libcurl, libmicrohttpd), the PostgreSQL server the embedded default and the tests run,
# the openssl command that makes test and first-run certificates, the third-party SIP stacks of
# the interop tests (Perl's Net::SIP, SIPp 3.6.1 from sip-tester, baresip 1.0 on libre 1.1,
# Linphone's console client linphonec 5.1 from linphone-cli, run under util-linux's `script` from
# the essential bsdutils; Tests/RouseServerTests/Interop*Tests.swift), the curl command of the
# docs' examples (DocsExamplesTests runs them), and headless Chromium with its WebDriver for the
# admin pages' browser test (AdminPagesBrowserTests), and dnsmasq, the DNS server the RFC 3263
# resolver is tested against (DNSResolverTests), and Kamailio, the PBX of the gateway-mode tests
# (Tests/Interop/kamailio, GatewayKamailioTests and GatewayProcessTests), and tinyproxy, the HTTP
# CONNECT proxy the push_proxy tests put between Rouse and the push stand-ins (PushProxyTests,
# WebPushProcessTests).
set -euo pipefail

packages=(
    pkg-config
    libssl-dev
    openssl
    libpq-dev
    libcurl4-openssl-dev
    libmicrohttpd-dev
    postgresql
    postgresql-contrib
    libnet-sip-perl
    sip-tester
    baresip-core
    linphone-cli
    bsdutils
    chromium
    chromium-driver
    curl
    dnsmasq-base
    kamailio
    tinyproxy
)

missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done

if [ "${#missing[@]}" -gt 0 ]; then
    echo "rouse: installing ${missing[*]}" >&2
    if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v swift >/dev/null 2>&1; then
    echo "rouse: the Swift toolchain (6.0 or later) must be on PATH" >&2
    exit 1
fi
