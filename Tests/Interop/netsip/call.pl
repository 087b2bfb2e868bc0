#!/usr/bin/perl
# Rouse interop: a call between two phones built on a third-party SIP stack (Perl Net::SIP, Debian
# libnet-sip-perl), through Rouse as registrar and record-routing proxy, over UDP on loopback.
#
#   call.pl --role callee --proxy 127.0.0.1:PORT --user 1002 --domain example.com --password P
#       registers, prints "registered", answers the first INVITE ("answered"), and exits 0 once
#       the caller's BYE came ("bye received").
#   call.pl --role caller --proxy 127.0.0.1:PORT --user 1001 --domain example.com --password P --to 1002
#       INVITEs sip:1002@example.com through the proxy (answering its 407), prints "answered" on the
#       200, sends BYE and exits 0 once the BYE was answered ("hung up").
# Every wait is bounded; loopback only.
use strict;
use warnings;
use Getopt::Long;
use IO::Handle;
use IO::Socket::IP;
use Net::SIP qw(:all);

Net::SIP::Debug->level($ENV{NET_SIP_DEBUG}) if $ENV{NET_SIP_DEBUG};

my ($role, $proxy, $user, $domain, $password, $to) = ('', '', '', '', '', '');
my $timeout = 30;
GetOptions(
    'role=s' => \$role, 'proxy=s' => \$proxy, 'user=s' => \$user, 'domain=s' => \$domain,
    'password=s' => \$password, 'to=s' => \$to, 'timeout=i' => \$timeout,
) or die "usage: call.pl --role callee|caller --proxy HOST:PORT --user N --domain D --password P [--to N]\n";
die "call.pl: the proxy must be on 127.0.0.1\n" unless $proxy =~ m{^127\.0\.0\.1:\d+$};
STDOUT->autoflush(1);
$SIG{ALRM} = sub { print "failed: no end within the time bound\n"; exit 3 };
alarm($timeout * 2);

my $socket = IO::Socket::IP->new(LocalAddr => '127.0.0.1', LocalPort => 0, Proto => 'udp')
    or die "call.pl: cannot open a udp socket: $!\n";
my $leg = Net::SIP::Leg->new(sock => $socket, proto => 'udp') or die "call.pl: cannot make a leg: $!\n";
my $ua = Net::SIP::Simple->new(
    from          => "sip:$user\@$domain",
    auth          => [ $user, $password ],
    leg           => $leg,
    outgoing_proxy => "sip:$proxy",
    registrar     => "sip:$proxy",
);

if ($role eq 'callee') {
    my ($done, $code);
    $ua->register(expires => 600, cb_final => sub { my ($status, %info) = @_; $done = $status; $code = $info{code} });
    $ua->loop($timeout, \$done);
    if (($done // '') ne 'OK') { print "failed: REGISTER answered ", ($code // $done // 'nothing'), "\n"; exit 1 }
    print "registered\n";
    my ($answered, $bye);
    $ua->listen(
        cb_established => sub { print "answered\n"; $answered = 1 },
        cb_cleanup     => sub { $bye = 1 },
    );
    $ua->loop($timeout, \$bye);
    if (!$answered) { print "failed: no INVITE came\n"; exit 1 }
    if (!$bye) { print "failed: no BYE came\n"; exit 2 }
    print "bye received\n";
    exit 0;
}

die "call.pl: --to is needed for the caller\n" unless $to;
my ($final, $code);
my $call = $ua->invite("sip:$to\@$domain", cb_final => sub { my ($status, $self, %info) = @_; $final = $status; $code = $info{code} });
$ua->loop($timeout, \$final);
if (($final // '') ne 'OK') { print "failed: INVITE answered ", ($code // $final // 'nothing'), "\n"; exit 1 }
print "answered\n";
my $stopped;
$call->bye(cb_final => sub { $stopped = 1 });
$ua->loop($timeout, \$stopped);
if (!$stopped) { print "failed: BYE not answered\n"; exit 2 }
print "hung up\n";
exit 0;
