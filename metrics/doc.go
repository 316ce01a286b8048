// Package metrics holds smss's Prometheus instrumentation: the collectors,
// a small recording API for the hot paths, and the Source interface through
// which state that is cheaper to read at scrape time (topics, subscribers,
// replication, delays, TLS certificates) reaches /metrics and the admin
// API.
//
// Invariants:
//   - A Metrics owns its own prometheus.Registry; nothing is registered on
//     the global default registry, so several servers can live in one
//     process (tests) without collisions.
//   - A nil *Metrics is a valid receiver: every recording method is a no-op
//     on it, so callers never check.
//   - Recording methods allocate nothing once the series they touch exists:
//     per-command series are created in New, per-topic series are created on
//     a topic's first publish and cached in a sync.Map keyed by the raw topic
//     name, and TopicDeleted drops them again.
//   - Prometheus label values must be UTF-8 while topic names and subscriber
//     names are arbitrary bytes (docs/protocol.md §0, §11): label values are the names
//     with invalid sequences replaced by U+FFFD. Two names that collide after
//     that replacement share one series for counters and the first one wins
//     for scrape-time gauges (a duplicate series would fail the scrape).
//   - The number of per-topic counter series is capped (Options.MaxTopics);
//     topics beyond the cap are counted under topic="_other" so a burst of
//     temporary topics cannot grow the exposition without bound.
//
// Metric families (all prefixed smss_):
//
//	recorded on the hot path
//	  request_duration_seconds{command}        histogram
//	  request_errors_total{command}            counter
//	  topic_publishes_total{topic}             counter (pub and delay-apply requests)
//	  topic_published_messages_total{topic}    counter
//	  topic_published_bytes_total{topic}       counter (record bytes)
//	  topic_delivered_messages_total{topic}    counter (sent to subscribers)
//	  topic_delivered_bytes_total{topic}       counter
//	  published_messages_total, published_bytes_total, delivered_messages_total,
//	  delivered_bytes_total                    counters over all topics (survive deletion)
//	  group_commit_commands, group_commit_bytes histograms
//	  fsync_duration_seconds                   histogram
//	  connections_open                         gauge
//	  connections_total                        counter
//	  errors_total{kind}                       counter
//	read from the Source at scrape time
//	  info{version,role}                       gauge, always 1
//	  start_time_seconds, last_event_id, binlog_disk_bytes
//	  promotion_epoch                          gauge: grows with every promotion
//	  is_master                                gauge: 1 master, 0 slave (changes on promotion)
//	  topics{state}                            normal | expired | deleted
//	  topic_disk_bytes{topic}, topic_messages{topic}, topic_last_event_id{topic}
//	  subscribers, subscriber_lag_events{topic,who}, subscriber_position{topic,who}
//	  cursor_lag_messages{topic,who}, cursor_position{topic,who}
//	                                           stored positions (CursorSource), also of
//	                                           subscribers that are away
//	  queue_pending_messages, queue_backlog_messages, queue_in_flight_messages,
//	  queue_waiting_messages, queue_oldest_pending_age_seconds, queue_consumers,
//	  queue_{delivered,redelivered,acked,dead_lettered,dropped}_total  {topic,group}
//	                                           work-queue groups (QueueSource; a master)
//	  replication_slaves, replication_slave_lag_events{slave}         (master)
//	  replication_connected, replication_lag_events,
//	  replication_lag_seconds                                          (slave)
//	  delayed_pending, delayed_pending_due{within}
//	  tls_certificate_expiry_timestamp_seconds{key}
//	                                           NotAfter (Unix s) of the certificate in force, read
//	                                           at each scrape so reloads show; key tls.cert (the
//	                                           listener) or replication.cert (a slave's client
//	                                           certificate), present only when configured
//	  source_errors_total                      scrapes where the Source failed
//	plus the standard go_* and process_* families (Options.NoRuntime drops them)
package metrics
