/* ratelimit--0.2.0--0.3.0.sql: hardening, engines, quotas that survive */

\echo Use "ALTER EXTENSION ratelimit UPDATE TO '0.3.0'" to load this file. \quit
