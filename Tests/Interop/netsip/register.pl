#!/usr/bin/perl
# Rouse interop: a phone built on a third-party SIP stack (Perl Net::SIP, Debian libnet-sip-perl)
# registers with digest authentication, then unregisters with Expires: 0.
#
#   register.pl --registrar 127.0.0.1:PORT --transport udp|tcp --user 1001 --domain example.com \
#               --password P
#
# It prints "registered expires=N contact=URI" after the 200 to the REGISTER, then waits for one
# line on standard input (the test checks the database meanwhile), then sends the unregister
# (same Call-ID, same contact, same connection for TCP) and prints "unregistered" after its 200.
# Exit status 0 only when both were answered 200. Loopback only; every wait is bounded.
use strict;
use warnings;
use Getopt::Long;
use IO::Handle;
use IO::Socket::IP;
use Net::SIP qw(:all);

Net::SIP::Debug->level($ENV{NET_SIP_DEBUG}) if $ENV{NET_SIP_DEBUG};

my ($registrar, $transport, $user, $domain, $password) = ('', 'udp', '', '', '');
my $timeout = 30;
GetOptions(
    'registrar=s' => \$registrar,
    'transport=s' => \$transport,
    'user=s'      => \$user,
    'domain=s'    => \$domain,
    'password=s'  => \$password,
    'timeout=i'   => \$timeout,
) or die "usage: register.pl --registrar HOST:PORT --transport udp|tcp --user N --domain D --password P\n";
die "register.pl: the registrar must be on 127.0.0.1\n" unless $registrar =~ m{^127\.0\.0\.1:\d+$};
die "register.pl: transport is udp or tcp\n" unless $transport =~ m{^(udp|tcp)$};
STDOUT->autoflush(1);

# The whole run, including the wait for the test's go-ahead, is bounded.
$SIG{ALRM} = sub { print "failed: no end within the time bound\n"; exit 3 };
alarm($timeout * 3);

# A socket of our own on a port the kernel picks (a TCP leg listens on it too), so the leg, and
# the Contact made from it, name the real port.
my $socket = IO::Socket::IP->new(
    LocalAddr => '127.0.0.1', LocalPort => 0, Proto => $transport,
    ($transport eq 'tcp' ? (Listen => 5, ReuseAddr => 1) : ()),
) or die "register.pl: cannot open a $transport socket: $!\n";
my $leg = Net::SIP::Leg->new(sock => $socket, proto => $transport)
    or die "register.pl: cannot make a $transport leg: $!\n";
my $local = $leg->laddr(2);
my $contact = "sip:$user\@$local" . ($transport eq 'tcp' ? ';transport=tcp' : '');
my $ua = Net::SIP::Simple->new(
    from      => "sip:$user\@$domain",
    auth      => [ $user, $password ],
    leg       => $leg,
    # No ;transport=tcp here: Net::SIP would put the Request-URI in angle brackets, which RFC 3261
    # forbids (and Rouse answers 400). The only leg is of the right transport anyway.
    registrar => "sip:$registrar",
);

# Registers with `expires`; returns (status, granted expires) once a final answer came.
sub register_once {
    my ($expires) = @_;
    my ($done, %result);
    $ua->register(
        expires  => $expires,
        contact  => $contact,
        cb_final => sub { my ($status, %info) = @_; $done = $status; %result = %info },
    );
    $ua->loop($timeout, \$done);
    return ($done // 'TIMEOUT', $result{expires}, $result{code});
}

my ($status, $granted, $code) = register_once(3600);
if ($status ne 'OK') {
    print "failed: REGISTER answered ", ($code // $status), "\n";
    exit 1;
}
print "registered expires=", ($granted // '?'), " contact=$contact\n";

my $go = <STDIN>;
($status, $granted, $code) = register_once(0);
if ($status ne 'OK') {
    print "failed: unregister answered ", ($code // $status), "\n";
    exit 2;
}
print "unregistered\n";
exit 0;
